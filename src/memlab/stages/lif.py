"""Synaptic propagation: leaky integrate-and-fire over the entity graph (docs/design.md §D2.3).

Design §D2.3: "The top-ranked nodes from RRF become seed nodes. A Leaky Integrate-and-Fire neuron
model propagates activation through the taxonomy graph — nodes semantically adjacent to the
seeds accumulate charge and fire into context." The neuron model is the textbook discrete LIF
(Lapicque 1907; Gerstner & Kistler, *Spiking Neuron Models*, 2002, ch. 4) on a graph.

Every entity is a neuron with membrane potential ``V``. Synapses are the entity-graph edges, in
both directions, with weight ``w_ij = min(weight_scale × a_ij, max_weight)`` where ``a_ij`` is
the :meth:`EntityGraph.adjacency` entry (summed edge strengths with ``weight="strength"``, 1 per
edge with ``"binary"``). With ``I`` the seed currents and ``s(t)`` the spike vector:

* ``t = 0``: ``V(0) = I``.
* ``t = 1 … steps``: ``V(t) = leak · V(t-1) + W · s(t-1)`` for every neuron not refractory.
* At every ``t``, a neuron not refractory with ``V(t) ≥ threshold`` spikes: ``s(t) = 1``, its
  potential is set to ``reset`` and it is refractory for the next ``refractory`` steps, during
  which its potential stays at ``reset``, it ignores input and cannot spike.

:class:`LIFTrace` records ``V(t)`` *before* the reset (the value compared to the threshold; a
refractory neuron shows ``reset``), so a spike is visible as a potential at or above threshold.

Seeds. The candidates ranked ``1 … n_seeds`` are the seed memories. Candidate scores are
max-normalised over the whole incoming frame, ``score_norm = max(score, 0) / max(score)`` (all 0
when no score is positive), so the best candidate has 1. Each seed memory injects
``input_gain × score_norm`` into every entity linked to it through a link whose role is in
``roles``; an entity linked to several seed memories receives the sum.

Memories. A memory's ``activation`` is the sum, over its entities (links with a role in
``roles``), of their spike counts over ``t = 0 … steps``. Candidates keep their rows and gain
``activation``; visible memories with positive activation that were not candidates are added.
The final score is ``score_norm + activation_weight × activation / max(activation)`` (new
memories have ``score_norm = 0``), and the frame is re-ranked by it.

Defaults: design §D2.3 gives no constants; ``leak = 0.8`` per step and a unit threshold are the
usual discrete-time choices, 5 steps reach neurons a few synapses away, and ``weight_scale =
0.2`` makes a synapse of strength 5 (the seed-000 saturation strength) carry a full threshold.
``roles = ("mentioned",)`` keeps the agent and client entities, which link to nearly every
memory, from pulling in the whole store.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import polars as pl
import scipy.sparse as sp

from memlab.fastframe import (
    by_rank,
    drop_columns,
    f64_series,
    i64_series,
    keep_rows,
    with_series,
)
from memlab.memory.records import ENTITY_ROLES
from memlab.numeric import is_finite_number, shown_number
from memlab.stages.base import (
    ROW_COLUMN,
    QueryContext,
    Stage,
    frame_rows,
    register_stage,
    rerank,
    score_column,
)
from memlab.stages.constraints import Integral, Interval, Options, Real, SequenceOf
from memlab.stages.features import max_normalise
from memlab.stages.graph import (
    check_roles,
    entity_currents,
    memory_activation,
    visible_graph,
)

if TYPE_CHECKING:
    from memlab.memory.graph import EntityGraph


@dataclass
class LIFTrace:
    """One simulation, step by step.

    Attributes:
        potentials: ``(steps + 1, n)`` membrane potentials before reset.
        spikes: ``(steps + 1, n)`` booleans, ``True`` where a neuron spiked.
        fired: Neurons in order of their first spike (same step: lower index first).
        seed_currents: The input current ``I`` injected at ``t = 0``.
    """

    potentials: np.ndarray
    spikes: np.ndarray
    fired: list[int] = field(default_factory=list)
    seed_currents: np.ndarray | None = None

    @property
    def spike_counts(self) -> np.ndarray:
        """Spikes per neuron over the whole run."""
        return self.spikes.sum(axis=0).astype(np.int64)

    @property
    def first_spike(self) -> np.ndarray:
        """Step of each neuron's first spike (``-1`` if it never spiked)."""
        any_spike = self.spikes.any(axis=0)
        return np.where(any_spike, self.spikes.argmax(axis=0), -1).astype(np.int64)


def _number(value: Any, name: str, *, low: float | None = None) -> float:
    if not is_finite_number(value):
        raise ValueError(
            f"lif.py: LIF field '{name}' must be a finite number, got {shown_number(value)}"
        )
    if low is not None and value < low:
        raise ValueError(f"lif.py: LIF field '{name}' must be >= {low}, got {value!r}")
    return float(value)


def _count(value: Any, name: str, *, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"lif.py: LIF field '{name}' must be an int >= {low}, got {value!r}")
    return value


@register_stage("lif")
class LIF(Stage):
    """Expand and re-rank candidates by leaky integrate-and-fire propagation (docs/design.md §D2.3).

    The trace of the run is written to ``ctx.trace["lif"]``: ``trace`` (:class:`LIFTrace`),
    ``seed_mem_ids``, ``fired`` (entity indices in firing order) and ``added`` (mem ids brought
    in by propagation).

    Args:
        n_seeds: Candidates (by rank) whose entities receive input current.
        input_gain: Current per unit of normalised candidate score.
        leak: Fraction of the potential kept from one step to the next.
        threshold: Potential at which a neuron spikes.
        reset: Potential right after a spike.
        refractory: Steps after a spike during which a neuron is silent.
        steps: Simulated steps after ``t = 0``.
        weight: Edge weight of the adjacency, ``"strength"`` or ``"binary"``.
        weight_scale: Synaptic weight per unit of edge weight.
        max_weight: Cap of a synaptic weight.
        activation_weight: Weight of the normalised activation in the final score.
        top_k: Keep this many candidates after re-ranking (``None`` = all).
        roles: Entity-memory links used for seeding and for pulling memories in.
    """

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "n_seeds": [Interval(Integral, 0, None, closed="left")],
        "input_gain": [Interval(Real, None, None, closed="neither")],
        "leak": [Interval(Real, 0, None, closed="left")],
        "threshold": [Interval(Real, None, None, closed="neither")],
        "reset": [Interval(Real, None, None, closed="neither")],
        "refractory": [Interval(Integral, 0, None, closed="left")],
        "steps": [Interval(Integral, 0, None, closed="left")],
        "weight": [Options(str, ("strength", "binary"))],
        "weight_scale": [Interval(Real, 0, None, closed="left")],
        "max_weight": [Interval(Real, 0, None, closed="left")],
        "activation_weight": [Interval(Real, None, None, closed="neither")],
        "top_k": [Interval(Integral, 1, None, closed="left"), None],
        "roles": [SequenceOf(Options(str, ENTITY_ROLES))],
    }

    columns = (score_column("activation", "LIF activation"),)
    embeds_other_texts = False  # embeds no text but the query

    def __init__(
        self,
        n_seeds: int = 5,
        input_gain: float = 1.0,
        leak: float = 0.8,
        threshold: float = 1.0,
        reset: float = 0.0,
        refractory: int = 2,
        steps: int = 5,
        weight: str = "strength",
        weight_scale: float = 0.2,
        max_weight: float = 1.0,
        activation_weight: float = 0.5,
        top_k: int | None = None,
        roles: tuple[str, ...] = ("mentioned",),
    ) -> None:
        self.n_seeds = n_seeds
        self.input_gain = input_gain
        self.leak = leak
        self.threshold = threshold
        self.reset = reset
        self.refractory = refractory
        self.steps = steps
        self.weight = weight
        self.weight_scale = weight_scale
        self.max_weight = max_weight
        self.activation_weight = activation_weight
        self.top_k = top_k
        self.roles = roles

    # ------------------------------------------------------------------ simulation
    def synapses(self, graph: EntityGraph) -> sp.csr_matrix:
        """The synaptic weight matrix ``min(weight_scale × adjacency, max_weight)`` (cached)."""
        scale = _number(self.weight_scale, "weight_scale", low=0.0)
        cap = _number(self.max_weight, "max_weight", low=0.0)
        adj = graph.adjacency(weight=self.weight)
        key = (self.weight, scale, cap)
        hit = getattr(self, "synapses_", None)
        if hit is not None and hit[0] is adj and hit[1] == key:
            return hit[2]
        w = adj.copy()
        w.data = np.minimum(scale * w.data, cap)
        w.eliminate_zeros()
        self.synapses_ = (adj, key, w)
        return w

    def simulate(
        self, graph: EntityGraph, seed_currents: Mapping[int, float] | np.ndarray
    ) -> LIFTrace:
        """Run the network from ``seed_currents`` (entity index → current, or a full vector).

        Returns:
            The :class:`LIFTrace` of ``steps + 1`` time points.
        """
        leak = _number(self.leak, "leak", low=0.0)
        threshold = _number(self.threshold, "threshold")
        reset = _number(self.reset, "reset")
        refractory = _count(self.refractory, "refractory", low=0)
        steps = _count(self.steps, "steps", low=0)
        w = self.synapses(graph)
        n = w.shape[0]
        if isinstance(seed_currents, Mapping):
            current = np.zeros(n, dtype=np.float64)
            for e, c in seed_currents.items():
                if not 0 <= int(e) < n:
                    raise ValueError(f"lif.py: seed entity {e} is not in the graph ({n} entities)")
                current[int(e)] += float(c)
        else:
            current = np.asarray(seed_currents, dtype=np.float64).reshape(-1)
            if current.shape[0] != n:
                raise ValueError(
                    f"lif.py: field 'seed_currents' has {current.shape[0]} entries for a graph "
                    f"of {n} entities"
                )
        potentials = np.empty((steps + 1, n), dtype=np.float64)
        spikes = np.zeros((steps + 1, n), dtype=bool)
        v = current.copy()
        silent = np.zeros(n, dtype=np.int64)
        fired: list[int] = []
        seen = np.zeros(n, dtype=bool)
        for t in range(steps + 1):
            if t > 0:
                drive = w @ spikes[t - 1].astype(np.float64) if spikes[t - 1].any() else 0.0
                free = silent == 0
                v = np.where(free, leak * v + drive, reset)
                silent = np.where(free, 0, silent - 1)
                can = free
            else:
                can = np.ones(n, dtype=bool)
            potentials[t] = v
            s = can & (v >= threshold)
            spikes[t] = s
            if s.any():
                new = np.flatnonzero(s & ~seen)
                fired.extend(int(i) for i in new)
                seen[new] = True
                v = np.where(s, reset, v)
                silent = np.where(s, refractory, silent)
        return LIFTrace(potentials=potentials, spikes=spikes, fired=fired, seed_currents=current)

    # ------------------------------------------------------------------ stage
    def transform(self, frame: pl.DataFrame, ctx: QueryContext) -> pl.DataFrame:
        n_seeds = _count(self.n_seeds, "n_seeds", low=0)
        gain = _number(self.input_gain, "input_gain")
        alpha = _number(self.activation_weight, "activation_weight")
        if self.top_k is not None:
            _count(self.top_k, "top_k", low=1)
        roles = check_roles(self.roles, "lif.py: LIF")
        store = ctx.store
        visible = ctx.visible_mask()

        frame = by_rank(frame)
        rows = frame_rows(frame, ctx)
        if len(rows) and not visible[rows].all():
            frame = keep_rows(frame, visible[rows])
            rows = rows[visible[rows]]
        score_norm = max_normalise(frame["score"].to_numpy())
        seed_rows = rows[:n_seeds]
        # incidence[:, seeds] @ (gain × score) and incidence.T @ spike counts, from the links
        # sorted once (graph.py): the sums of the sparse products, without building them
        current = entity_currents(ctx, roles, seed_rows, gain * score_norm[: len(seed_rows)])
        trace = self.simulate(visible_graph(ctx), current)

        counts = trace.spike_counts.astype(np.float64)
        mem_act = memory_activation(ctx, roles, counts)
        cand_act = mem_act[rows] if len(rows) else np.zeros(0)
        in_frame = np.zeros(len(store), dtype=bool)
        in_frame[rows] = True
        new_rows = np.flatnonzero(visible & (mem_act > 0.0) & ~in_frame)

        top = max(float(cand_act.max()) if len(cand_act) else 0.0,
                  float(mem_act[new_rows].max()) if len(new_rows) else 0.0)
        norm = (lambda a: a / top) if top > 0.0 else (lambda a: np.zeros_like(a))

        out = with_series(
            drop_columns(frame, "activation"),
            f64_series("activation", cand_act),
            f64_series("score", score_norm + alpha * norm(cand_act)),
        )
        added = store.ids_of(new_rows)
        if len(new_rows):
            columns = {
                "qid": pl.Series("qid", [ctx.qid] * len(new_rows), dtype=pl.String),
                "mem_id": pl.Series("mem_id", added, dtype=pl.String),
                "score": f64_series("score", alpha * norm(mem_act[new_rows])),
                "rank": i64_series("rank", np.zeros(len(new_rows), dtype=np.int64)),
                "activation": f64_series("activation", mem_act[new_rows]),
            }
            if ROW_COLUMN in out.columns:  # the frame keeps every candidate's store row
                columns[ROW_COLUMN] = i64_series(ROW_COLUMN, new_rows)
            out = pl.concat([out, pl.DataFrame(list(columns.values()))], how="diagonal_relaxed")
        out = rerank(out, store=store)  # by score, ties by memory id (rows: in numpy)
        if self.top_k is not None:
            out = out.head(self.top_k)
        ctx.trace["lif"] = {
            "trace": trace,
            "seed_mem_ids": frame["mem_id"].head(n_seeds).to_list(),
            "fired": list(trace.fired),
            "added": added,
        }
        return out
