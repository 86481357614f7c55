"""Activation spreading over the entity graph, step by step, and its drawing.

Two propagation models run over the same entity graph:

* graph BFS (design §D0.9, :meth:`EntityGraph.spread_activation`): the query's entities start at 1.0
  and each hop carries ``a(u) × hop_decay × boost(rel) × min(strength / 5, 1)``;
  :func:`bfs_steps` lists, for every depth ``t``, the activation every entity holds after ``t``
  hops.
* leaky integrate-and-fire (docs/design.md §D2.3, :class:`memlab.stages.lif.LIF`): the top retrieved
  memories inject current into their entities, potentials leak, spike and refract;
  :func:`lif_steps` lists every neuron's potential and spikes per step of a
  :class:`~memlab.stages.lif.LIFTrace`.

:func:`network_chart` draws either as an altair network on a Kamada-Kawai layout computed by
igraph (:func:`layout_frame`): node colour is the potential (or activation), spiking nodes are
ringed. :func:`propagation_rankings` answers the query with and without propagation.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import altair as alt
import numpy as np
import polars as pl

from memlab.stages.base import QueryContext, Stage, empty_candidates
from memlab.stages.bm25 import BM25
from memlab.stages.dense import Dense
from memlab.stages.graph import Graph
from memlab.stages.lif import LIF, LIFTrace
from memlab.stages.rrf import RRF

if TYPE_CHECKING:
    from memlab.memory.graph import EntityGraph
    from memlab.memory.store import MemoryStore

_BFS_SCHEMA = {
    "step": pl.Int64,
    "entity_idx": pl.Int64,
    "name": pl.String,
    "activation": pl.Float64,
    "changed": pl.Boolean,
}
_LIF_SCHEMA = {
    "step": pl.Int64,
    "entity_idx": pl.Int64,
    "name": pl.String,
    "potential": pl.Float64,
    "spiked": pl.Boolean,
    "spikes": pl.Int64,
}


def _names(graph: EntityGraph) -> list[str]:
    return graph.entities_frame()["name"].to_list()


def bfs_steps(
    graph: EntityGraph,
    seeds: Sequence[int],
    *,
    hop_decay: float = 0.8,
    causal_boost: float = 2.0,
    max_depth: int = 2,
    min_activation: float = 0.1,
    strength_saturation: float = 5.0,
) -> pl.DataFrame:
    """The BFS spreading activation after each hop ``t = 0 … max_depth``.

    Args:
        graph: The entity graph.
        seeds: Seed entity indices (activation 1.0 each).
        hop_decay: Multiplier per hop (docs/design.md §D0.9 ``GRAPH_SEARCH_DECAY`` = 0.8).
        causal_boost: Extra multiplier on typed relations (design §D0.9 ``CAUSAL_BOOST`` = 2.0).
        max_depth: Hops (docs/design.md §D0.9 ``MAX_DEPTH`` = 2).
        min_activation: Activations below this are not propagated (docs/design.md §D0.9: 0.1).
        strength_saturation: Edge strength that carries fully (docs/design.md §D0.9: 5).

    Returns:
        ``step, entity_idx, name, activation, changed``: one row per step and entity activated
        by then, holding its activation after that many hops; ``changed`` marks the entities
        set or raised at that step. Steps after the spread has stopped repeat the last state.
        Sorted by step, then entity index.
    """
    rows: list[tuple[int, int, str, float, bool]] = []
    if not seeds:
        return pl.DataFrame(rows, schema=_BFS_SCHEMA, orient="row")
    _, levels = graph.spread_activation(
        list(seeds),
        hop_decay=hop_decay,
        causal_boost=causal_boost,
        max_depth=max_depth,
        min_activation=min_activation,
        strength_saturation=strength_saturation,
        trace=True,
    )
    names = _names(graph)
    state: dict[int, float] = {}
    for t in range(max_depth + 1):
        level = levels[t] if t < len(levels) else {}
        state.update(level)
        for e in sorted(state):
            rows.append((t, e, names[e], float(state[e]), e in level))
    return pl.DataFrame(rows, schema=_BFS_SCHEMA, orient="row")


def lif_steps(
    trace: LIFTrace, graph: EntityGraph, *, nodes: Sequence[int] | None = None
) -> pl.DataFrame:
    """The potentials and spikes of a LIF run, one row per step and neuron.

    Args:
        trace: The run (:meth:`memlab.stages.lif.LIF.simulate`).
        graph: The entity graph it ran on (for the names).
        nodes: Neurons to list (default: those whose potential is non-zero at some step).

    Returns:
        ``step, entity_idx, name, potential, spiked, spikes``: ``potential`` is ``V(t)`` before
        the reset (a spike shows as a potential at or above threshold), ``spikes`` counts the
        spikes up to and including ``t``. Sorted by step, then entity index.
    """
    pot = trace.potentials
    spk = trace.spikes
    if nodes is None:
        idx = np.flatnonzero((pot != 0.0).any(axis=0) | spk.any(axis=0))
    else:
        idx = np.asarray(sorted(set(int(n) for n in nodes)), dtype=np.int64)
    names = _names(graph)
    cum = np.cumsum(spk, axis=0)
    rows = [
        (t, int(e), names[int(e)], float(pot[t, e]), bool(spk[t, e]), int(cum[t, e]))
        for t in range(pot.shape[0])
        for e in idx
    ]
    return pl.DataFrame(rows, schema=_LIF_SCHEMA, orient="row")


def focus_nodes(graph: EntityGraph, active: Sequence[int], *, max_nodes: int = 40) -> list[int]:
    """Which entities to draw: ``active`` ones first (in the order given, at most
    ``max_nodes``), then their neighbours by descending edge strength (ties: lower index) until
    ``max_nodes`` are chosen."""
    if isinstance(max_nodes, bool) or not isinstance(max_nodes, int) or max_nodes < 1:
        raise ValueError(f"activation.py: field 'max_nodes' must be an int >= 1, got {max_nodes!r}")
    chosen = list(dict.fromkeys(int(a) for a in active))[:max_nodes]
    taken = set(chosen)
    ring: dict[int, float] = {}
    for a in chosen:
        for v, _, strength in graph.neighbours(a):
            if v not in taken:
                ring[v] = max(ring.get(v, 0.0), float(strength))
    for v, _ in sorted(ring.items(), key=lambda kv: (-kv[1], kv[0])):
        if len(chosen) >= max_nodes:
            break
        chosen.append(v)
    return chosen


def lif_seeds(trace: LIFTrace) -> list[int]:
    """The LIF input neurons: entities whose seed current is positive, by index (none when the
    trace records no seed current)."""
    if trace.seed_currents is None:
        return []
    return [int(i) for i in (trace.seed_currents > 0).nonzero()[0]]


def drawn_entities(
    graph: EntityGraph,
    bfs: pl.DataFrame,
    bfs_seeds: Sequence[int],
    trace: LIFTrace,
    *,
    max_nodes: int = 30,
) -> list[int]:
    """The entities both network charts draw (:func:`focus_nodes`).

    Active entities come first, in this order: the BFS seeds, the LIF input neurons
    (:func:`lif_seeds`), the entities active at the last BFS step (most activation first), the
    neurons that fired; then their neighbours until ``max_nodes`` are chosen.

    Args:
        graph: The entity graph.
        bfs: :func:`bfs_steps` of the query.
        bfs_seeds: The BFS seed entities.
        trace: The LIF run.
        max_nodes: How many entities to draw.

    Returns:
        Entity indices, at most ``max_nodes``.
    """
    last = (
        bfs.filter(pl.col("step") == bfs["step"].max())
        .sort("activation", descending=True)["entity_idx"]
        .to_list()
        if bfs.height
        else []
    )
    return focus_nodes(
        graph, [*bfs_seeds, *lif_seeds(trace), *last, *trace.fired], max_nodes=max_nodes
    )


def layout_frame(graph: EntityGraph, nodes: Sequence[int]) -> pl.DataFrame:
    """A Kamada-Kawai layout (igraph) of the subgraph induced by ``nodes``.

    The layout starts from the nodes placed on a circle in ascending index order, which makes it
    deterministic, and is scaled into the unit square (rounded to 6 decimals).

    Returns:
        ``entity_idx, name, type, x, y`` in ascending entity index.
    """
    ids = sorted(set(int(n) for n in nodes))
    schema = {"entity_idx": pl.Int64, "name": pl.String, "type": pl.String,
              "x": pl.Float64, "y": pl.Float64}
    if not ids:
        return pl.DataFrame(schema=schema)
    sub = graph.to_igraph().induced_subgraph(ids).as_undirected(mode="collapse")
    n = len(ids)
    start = [[math.cos(2 * math.pi * i / n), math.sin(2 * math.pi * i / n)] for i in range(n)]
    coords = np.asarray(sub.layout_kamada_kawai(seed=start).coords, dtype=np.float64)
    lo, hi = coords.min(axis=0), coords.max(axis=0)
    span = np.where(hi - lo > 0, hi - lo, 1.0)
    coords = np.where(hi - lo > 0, (coords - lo) / span, 0.5)
    ents = [graph.entity(i) for i in ids]
    return pl.DataFrame(
        {
            "entity_idx": ids,
            "name": [e.name for e in ents],
            "type": [e.type for e in ents],
            "x": np.round(coords[:, 0], 6),
            "y": np.round(coords[:, 1], 6),
        },
        schema=schema,
    )


def network_edges(graph: EntityGraph, layout: pl.DataFrame) -> pl.DataFrame:
    """Edges between the nodes of ``layout`` with their end points.

    Returns:
        ``src, dst, relation, strength, x, y, x2, y2``, in the graph's edge order.
    """
    pos = layout.select("entity_idx", "x", "y")
    edges = graph.edges_frame().select("src", "dst", "relation", "strength")
    keep = pos["entity_idx"].implode()
    edges = edges.filter(pl.col("src").is_in(keep) & pl.col("dst").is_in(keep))
    return (
        edges.with_row_index("_order")
        .join(pos.rename({"entity_idx": "src"}), on="src", how="left")
        .join(pos.rename({"entity_idx": "dst", "x": "x2", "y": "y2"}), on="dst", how="left")
        .sort("_order")
        .drop("_order")
    )


def node_states(
    layout: pl.DataFrame,
    values: Mapping[int, float],
    *,
    spiked: Sequence[int] = (),
    seeds: Sequence[int] = (),
    n_labels: int | None = None,
) -> pl.DataFrame:
    """``layout`` plus ``value`` (0.0 where absent), ``spiked`` and ``seed`` flags and
    ``label``: the name of the seeds and of the ``n_labels`` nodes of highest positive value
    (ties: lower index), ``""`` for the others (every name when ``n_labels`` is ``None``)."""
    ids = layout["entity_idx"].to_list()
    names = layout["name"].to_list()
    spk, sd = set(int(s) for s in spiked), set(int(s) for s in seeds)
    vals = [float(values.get(i, 0.0)) for i in ids]
    if n_labels is None:
        shown = set(ids)
    else:
        order = sorted((i for i, v in zip(ids, vals, strict=True) if v > 0),
                       key=lambda i: (-float(values.get(i, 0.0)), i))
        shown = set(order[: max(int(n_labels), 0)]) | sd
    return layout.with_columns(
        pl.Series("value", vals, dtype=pl.Float64),
        pl.Series("spiked", [i in spk for i in ids], dtype=pl.Boolean),
        pl.Series("seed", [i in sd for i in ids], dtype=pl.Boolean),
        pl.Series("label", [n if i in shown else "" for i, n in zip(ids, names, strict=True)],
                  dtype=pl.String),
    )


def network_chart(
    nodes: pl.DataFrame,
    edges: pl.DataFrame,
    *,
    memories: pl.DataFrame | None = None,
    memory_edges: pl.DataFrame | None = None,
    value_title: str = "potential",
    color_max: float = 1.0,
    title: str = "",
    width: int = 640,
    height: int = 460,
) -> alt.LayerChart:
    """The entity network: grey edges (width by strength), nodes coloured by ``value``.

    Args:
        nodes: :func:`node_states` output (its ``label`` column is drawn, when present).
        edges: :func:`network_edges` output.
        memories: :func:`memory_nodes` output: memories drawn as squares beside their
            entities (relevant ones orange), labelled with their ranks.
        memory_edges: :func:`memory_nodes` links (dotted).
        value_title: Legend title of the colour scale.
        color_max: Upper end of the colour scale: pass the largest value over the steps
            shown (typed edges carry activations above 1).
        title: Chart title.
        width: Chart width in pixels.
        height: Chart height in pixels.

    Colours run from white (0) to dark blue (``color_max``). Spiking nodes get a red ring,
    seeds a black outline.
    """
    x = alt.X("x:Q", axis=None, scale=alt.Scale(domain=[-0.08, 1.08]))
    y = alt.Y("y:Q", axis=None, scale=alt.Scale(domain=[-0.08, 1.08]))
    layers: list[alt.Chart] = []
    if memory_edges is not None and memory_edges.height:
        layers.append(
            alt.Chart(memory_edges)
            .mark_rule(color="#e6a04f", opacity=0.5, strokeDash=[2, 2])
            .encode(x=x, y=y, x2="x2:Q", y2="y2:Q")
        )
    layers.append(
        alt.Chart(edges)
        .mark_rule(color="#9aa0a6", opacity=0.6)
        .encode(
            x=x,
            y=y,
            x2="x2:Q",
            y2="y2:Q",
            strokeWidth=alt.StrokeWidth("strength:Q", legend=None,
                                        scale=alt.Scale(range=[0.5, 4])),
            tooltip=["relation:N", alt.Tooltip("strength:Q", format=".2f")],
        )
    )
    tooltip = ["name:N", "type:N", alt.Tooltip("value:Q", format=".3f", title=value_title),
               "spiked:N", "seed:N"]
    layers.append(
        alt.Chart(nodes)
        .mark_circle(size=240, opacity=1.0, stroke="#222")
        .encode(
            x=x,
            y=y,
            color=alt.Color(
                "value:Q",
                title=f"{value_title} (max {float(color_max):.2f})",
                scale=alt.Scale(scheme="blues", domain=[0.0, max(float(color_max), 1e-9)],
                                clamp=True),
                legend=alt.Legend(orient="bottom", gradientLength=200),
            ),
            strokeWidth=alt.condition("datum.seed", alt.value(3.0), alt.value(0.8)),
            tooltip=tooltip,
        )
    )
    layers.append(
        alt.Chart(nodes)
        .transform_filter("datum.spiked")
        .mark_point(size=560, shape="circle", filled=False, color="#d62728", strokeWidth=3)
        .encode(x=x, y=y, tooltip=tooltip)
    )
    text = "label:N" if "label" in nodes.columns else "name:N"
    layers.append(
        alt.Chart(nodes)
        .mark_text(dy=-14, fontSize=11, color="#222", fontWeight="bold")
        .encode(x=x, y=y, text=text)
    )
    if memories is not None and memories.height:
        mtip = ["mem_id:N", "text:N", "rank_before:Q", "rank_after:Q", "relevant:N"]
        layers.append(
            alt.Chart(memories)
            .mark_square(size=120, stroke="#333", strokeWidth=0.8)
            .encode(
                x=x,
                y=y,
                color=alt.condition("datum.relevant", alt.value("#f28e2b"),
                                    alt.value("#d9d9d9")),
                tooltip=mtip,
            )
        )
        layers.append(
            alt.Chart(memories)
            .mark_text(dy=13, fontSize=10, color="#a0522d")
            .encode(x=x, y=y, text="label:N")
        )
    return alt.layer(*layers).properties(width=width, height=height, title=title)


def memory_nodes(
    store: MemoryStore,
    layout: pl.DataFrame,
    mem_ids: Sequence[str],
    *,
    before: Mapping[str, int] | None = None,
    after: Mapping[str, int] | None = None,
    relevant: Sequence[str] = (),
    offset: float = 0.08,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Memories placed beside the drawn entities they mention, and their links.

    Each memory sits at the mean position of its drawn entities, pushed ``offset`` along a
    direction that turns with its position in ``mem_ids`` (so memories of the same entities do
    not cover each other). Memories none of whose entities are drawn are left out.

    Returns:
        ``(nodes, links)``: ``mem_id, text, x, y, relevant, rank_before, rank_after, label``
        (``label``: ``"before→after"`` ranks, ``-`` where unranked) in ``mem_ids`` order, and
        ``mem_id, x, y, x2, y2`` (memory to entity).
    """
    pos = {int(e): (float(x), float(y)) for e, x, y in layout.select(
        "entity_idx", "x", "y").iter_rows()}
    before = before or {}
    after = after or {}
    rel = set(relevant)
    rows: list[tuple[str, str, float, float, bool, int | None, int | None, str]] = []
    links: list[tuple[str, float, float, float, float]] = []
    ids = list(dict.fromkeys(mem_ids))
    for j, mid in enumerate(ids):
        ents = [e for e in store.graph.entities_of(store.idx(mid)) if e in pos]
        if not ents:
            continue
        cx = sum(pos[e][0] for e in ents) / len(ents)
        cy = sum(pos[e][1] for e in ents) / len(ents)
        theta = 2 * math.pi * j / max(len(ids), 1)
        mx, my = cx + offset * math.cos(theta), cy + offset * math.sin(theta)
        b, a = before.get(mid), after.get(mid)
        label = f"{'-' if b is None else b}→{'-' if a is None else a}"
        rows.append((mid, store.get(mid).text, mx, my, mid in rel, b, a, label))
        links.extend((mid, mx, my, pos[e][0], pos[e][1]) for e in ents)
    nodes = pl.DataFrame(
        rows,
        schema={"mem_id": pl.String, "text": pl.String, "x": pl.Float64, "y": pl.Float64,
                "relevant": pl.Boolean, "rank_before": pl.Int64, "rank_after": pl.Int64,
                "label": pl.String},
        orient="row",
    )
    edges = pl.DataFrame(
        links,
        schema={"mem_id": pl.String, "x": pl.Float64, "y": pl.Float64, "x2": pl.Float64,
                "y2": pl.Float64},
        orient="row",
    )
    return nodes, edges


def rank_moves(
    rankings: Mapping[str, pl.DataFrame],
    store: MemoryStore,
    relevant: Sequence[str],
    *,
    base: str = "no propagation",
) -> pl.DataFrame:
    """Where each relevant memory ranks without propagation and with each model.

    Returns:
        ``mem_id, model, before, after, moved, text``: one row per relevant memory and ranking
        other than ``base``; ``moved`` is ``after - before`` (positive: pushed down), null
        where either ranking does not hold the memory. In ``relevant`` order, then ranking
        order.
    """
    ranks = {
        name: dict(zip(f["mem_id"].to_list(), f["rank"].to_list(), strict=True))
        for name, f in rankings.items()
    }
    if base not in ranks:
        raise ValueError(f"activation.py: base ranking {base!r} is not among {list(ranks)}")
    rows = []
    for mid in dict.fromkeys(relevant):
        b = ranks[base].get(mid)
        for name, r in ranks.items():
            if name == base:
                continue
            a = r.get(mid)
            moved = None if a is None or b is None else a - b
            rows.append((mid, name, b, a, moved, store.get(mid).text))
    return pl.DataFrame(
        rows,
        schema={"mem_id": pl.String, "model": pl.String, "before": pl.Int64, "after": pl.Int64,
                "moved": pl.Int64, "text": pl.String},
        orient="row",
    )


def describe_moves(moves: pl.DataFrame) -> list[str]:
    """One sentence per row of :func:`rank_moves`: ``LIF moved m12 from rank 3 to 21``."""
    def rank(v: int | None) -> str:
        return "unranked" if v is None else f"rank {v}"

    out = []
    for mid, model, b, a, moved, _ in moves.iter_rows():
        if moved == 0:
            out.append(f"{model} kept {mid} at {rank(a)}")
        else:
            out.append(f"{model} moved {mid} from {rank(b)} to {rank(a)}")
    return out


def propagation_params(stage: Stage, fn: Any) -> dict[str, Any]:
    """The parameters of ``stage`` (``get_params``) that the function ``fn`` also takes."""
    names = set(inspect.signature(fn).parameters)
    return {k: v for k, v in stage.get_params(deep=False).items() if k in names}


def store_context(
    path: str | Path, text: str, *, embedder: Any, client_id: str | None = None
) -> QueryContext:
    """A free-text query on a store directory, at the time of its newest memory.

    Raises:
        ValueError: If ``path`` is not a store directory, or the store is empty.
    """
    p = Path(path).expanduser()
    if not p.is_dir():
        raise ValueError(f"{p}: not a directory")
    from memlab.memory.store import MemoryStore

    store = MemoryStore(p, embedder=embedder, read_only=True)
    if len(store) == 0:
        raise ValueError(f"{p}: the store holds no memory")
    now = float(np.max(store.column("created_at")))
    return QueryContext(qid="free-text", text=text, store=store, now=now,
                        client_id=client_id, embedder=embedder)


def propagation_rankings(
    ctx: QueryContext,
    *,
    dense: Dense | None = None,
    bm25: BM25 | None = None,
    graph: Graph | None = None,
    rrf: RRF | None = None,
    lif: LIF | None = None,
) -> dict[str, pl.DataFrame]:
    """The query answered without and with propagation.

    * ``"no propagation"``: dense and BM25 fused by RRF;
    * ``"graph BFS"``: dense, BM25 and the BFS graph retriever fused by RRF;
    * ``"LIF"``: the ``"no propagation"`` ranking re-ranked and expanded by LIF.

    Stages left ``None`` are built with their defaults. ``ctx.trace`` receives the stages'
    traces (``"graph"``, ``"lif"``).
    """
    dense = Dense() if dense is None else dense
    bm25 = BM25() if bm25 is None else bm25
    graph = Graph() if graph is None else graph
    rrf = RRF() if rrf is None else rrf
    lif = LIF() if lif is None else lif
    frame = empty_candidates()
    d = dense.transform(frame, ctx)
    b = bm25.transform(frame, ctx)
    g = graph.transform(frame, ctx)
    base = rrf.fuse([d, b], ctx)
    return {
        "no propagation": base,
        "graph BFS": rrf.fuse([d, b, g], ctx),
        "LIF": lif.transform(base, ctx),
    }


def compare_rankings(
    rankings: Mapping[str, pl.DataFrame],
    store: MemoryStore,
    *,
    relevant: Sequence[str] = (),
    stale: Sequence[str] = (),
    top_k: int = 10,
) -> pl.DataFrame:
    """Side-by-side ranks of the memories in any ranking's top ``top_k`` and of ``relevant``.

    Returns:
        ``mem_id, label, <one rank column per ranking>, text``: ``label`` is ``"relevant"``,
        ``"stale"`` or ``""``; a rank is null where the ranking does not hold the memory. Sorted
        by the best rank over the rankings (unranked last), then ``mem_id``.
    """
    ranks: dict[str, dict[str, int]] = {
        name: dict(zip(f["mem_id"].to_list(), f["rank"].to_list(), strict=True))
        for name, f in rankings.items()
    }
    ids: list[str] = []
    for f in rankings.values():
        ids.extend(f.sort("rank")["mem_id"].head(top_k).to_list())
    ids.extend(relevant)
    ids = list(dict.fromkeys(ids))
    rel, st = set(relevant), set(stale)

    def best(mid: str) -> tuple[int, str]:
        got = [r[mid] for r in ranks.values() if mid in r]
        return (min(got) if got else 10**9, mid)

    ids.sort(key=best)
    data: dict[str, list[object]] = {
        "mem_id": ids,
        "label": ["relevant" if m in rel else "stale" if m in st else "" for m in ids],
    }
    schema: dict[str, pl.DataType] = {"mem_id": pl.String(), "label": pl.String()}
    for name, r in ranks.items():
        data[name] = [r.get(m) for m in ids]
        schema[name] = pl.Int64()
    data["text"] = [store.get(m).text for m in ids]
    schema["text"] = pl.String()
    return pl.DataFrame(data, schema=schema)


def pulled_in(
    base: pl.DataFrame, propagated: pl.DataFrame, store: MemoryStore, *, top_k: int = 10
) -> pl.DataFrame:
    """Memories in ``propagated``'s top ``top_k`` that are not in ``base``'s top ``top_k``.

    Returns:
        ``mem_id, rank, base_rank, score, text`` in ``propagated``'s rank order; ``base_rank``
        is the memory's rank without propagation (null when ``base`` does not hold it).
    """
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"activation.py: field 'top_k' must be an int >= 1, got {top_k!r}")
    base_ranks = dict(zip(base["mem_id"].to_list(), base["rank"].to_list(), strict=True))
    top = propagated.sort("rank").head(top_k)
    new = [
        (m, r, base_ranks.get(m), s)
        for m, r, s in top.select("mem_id", "rank", "score").iter_rows()
        if base_ranks.get(m, top_k + 1) > top_k
    ]
    return pl.DataFrame(
        {
            "mem_id": [n[0] for n in new],
            "rank": [n[1] for n in new],
            "base_rank": [n[2] for n in new],
            "score": [n[3] for n in new],
            "text": [store.get(n[0]).text for n in new],
        },
        schema={"mem_id": pl.String, "rank": pl.Int64, "base_rank": pl.Int64,
                "score": pl.Float64, "text": pl.String},
    )


def seed_table(
    graph: EntityGraph, bfs_seeds: Sequence[int], lif_trace: LIFTrace | None
) -> pl.DataFrame:
    """The seeds of both models: ``entity_idx, name, type, bfs_seed, lif_current``.

    ``lif_current`` is the input current the LIF run injected at ``t = 0`` (0.0 for none). Rows:
    BFS seeds and entities with a positive current, sorted by current descending, then index.
    """
    current = (
        np.zeros(graph.n_entities)
        if lif_trace is None or lif_trace.seed_currents is None
        else lif_trace.seed_currents
    )
    ids = sorted(set(int(s) for s in bfs_seeds) | set(int(i) for i in np.flatnonzero(current > 0)))
    ids.sort(key=lambda i: (-float(current[i]), i))
    ents = [graph.entity(i) for i in ids]
    return pl.DataFrame(
        {
            "entity_idx": ids,
            "name": [e.name for e in ents],
            "type": [e.type for e in ents],
            "bfs_seed": [i in set(bfs_seeds) for i in ids],
            "lif_current": [float(current[i]) for i in ids],
        },
        schema={"entity_idx": pl.Int64, "name": pl.String, "type": pl.String,
                "bfs_seed": pl.Boolean, "lif_current": pl.Float64},
    )


def with_text(ctx: QueryContext, text: str) -> QueryContext:
    """``ctx`` asking ``text`` instead (same store, time, client and scope; a fresh trace)."""
    import dataclasses

    return dataclasses.replace(ctx, qid="free-text", text=text, trace={}, query_vector=None)


def propagation_stages(values: Mapping[str, Any] | None = None) -> tuple[Graph, LIF]:
    """A :class:`Graph` and a :class:`LIF` stage with ``graph__…`` and ``lif__…`` values set
    (the names :func:`memlab.explore.tuning.tunable_params` gives them)."""
    graph, lif = Graph(), LIF()
    for key, value in (values or {}).items():
        stage, _, param = key.partition("__")
        target = {"graph": graph, "lif": lif}.get(stage)
        if target is None or not param:
            raise ValueError(f"activation.py: {key!r} is not graph__<param> or lif__<param>")
        target.set_params(**{param: value})
    return graph, lif
